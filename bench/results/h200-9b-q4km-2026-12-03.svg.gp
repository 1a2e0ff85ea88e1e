# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)
set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'h200-9b-q4km-2026-12-03.svg'
set multiplot layout 1,2 title 'memra-bench: memra-forge 9b q4_k_m seed 1 (qwen35) on NVIDIA H200 (sm_90, 132 SMs), graph replay' noenhanced
$d0 << EOD
1 247.095 0.319495
2 464.632 0.30659
3 590.728 0.265122
4 807.739 0.277281
5 960.625 0.268941
6 1131.79 0.269088
7 1263.61 0.262332
8 1447.21 0.267723
9 1424.12 0.238404
10 1451.08 0.222501
11 1554.88 0.220518
12 1651.8 0.218418
13 1683.6 0.208956
14 1769.14 0.207264
15 1844.18 0.204935
16 1965.82 0.20808
EOD
$d1 << EOD
1 237.192 0.308687
2 444.102 0.296782
3 567.305 0.259386
4 773.316 0.271976
5 917.703 0.264652
6 1082.19 0.266408
7 1208.37 0.261039
8 1384.05 0.267693
9 1368.45 0.240608
10 1397.51 0.226056
11 1497.85 0.225043
12 1592.53 0.22399
13 1626.19 0.215525
14 1710.25 0.214766
15 1784.59 0.21334
16 1902.18 0.217361
EOD
$d2 << EOD
1 231.356 0.31473
2 433.782 0.315455
3 551.782 0.284813
4 744.688 0.305802
5 854.673 0.296853
6 994.067 0.303309
7 1106.19 0.304169
8 1255.22 0.316762
9 1222.57 0.287021
10 1250.19 0.275915
11 1335.05 0.279276
12 1414.47 0.28232
13 1441.38 0.275992
14 1496.74 0.276177
15 1557.02 0.277912
16 1648.89 0.285609
EOD
$d3 << EOD
1 200.787 0.313722
2 373.547 0.347141
3 476.412 0.342188
4 623.956 0.382321
5 659.539 0.362364
6 770.606 0.39086
7 851.422 0.40618
8 953.591 0.433358
9 907.29 0.39636
10 934.623 0.39515
11 989.911 0.40713
12 1043.57 0.419186
13 1031.68 0.406035
14 1075.66 0.415863
15 1112.33 0.423333
16 1164.74 0.437131
EOD
set logscale x 2
set xrange [0.8:20]
set xtics (1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16)
set grid
set key top left
set xlabel 'batch tier B'
set ylabel 'tokens/s (all rows)'
set yrange [0:*]
plot $d0 using 1:2 with linespoints lw 2 pt 7 title 'depth 0', \
     $d1 using 1:2 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d2 using 1:2 with linespoints lw 2 pt 7 title 'depth 8192', \
     $d3 using 1:2 with linespoints lw 2 pt 7 title 'depth 32768'
set ylabel 'fraction of copy bandwidth (3985 GB/s)'
set yrange [0:1.05]
plot $d0 using 1:3 with linespoints lw 2 pt 7 title 'depth 0', \
     $d1 using 1:3 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d2 using 1:3 with linespoints lw 2 pt 7 title 'depth 8192', \
     $d3 using 1:3 with linespoints lw 2 pt 7 title 'depth 32768'
unset multiplot
