# memra-bench plot: run `gnuplot THIS_FILE` (svg terminal, no display needed)
set terminal svg size 1200,480 dynamic enhanced font 'sans,11' background rgb 'white'
set output 'h200-9b-q4km-2026-12-03c-sweep.svg'
set multiplot layout 1,2 title 'memra-bench: memra-forge 9b q4_k_m seed 1 (qwen35) on NVIDIA H200 (sm_90, 132 SMs), graph replay' noenhanced
$d0 << EOD
1 247.708 0.322104
2 463.627 0.307662
3 570.98 0.257712
4 790.764 0.272993
5 932.143 0.262447
6 1098.71 0.262705
7 1240.4 0.258974
8 1405.46 0.261474
9 1429.21 0.240614
10 1449.94 0.223588
11 1561.2 0.22267
12 1656.38 0.220266
13 1694.18 0.211462
14 1782.99 0.210071
15 1854.53 0.207254
16 1984.2 0.211216
EOD
$d1 << EOD
1 242.767 0.317734
2 455.715 0.30627
3 563.021 0.258887
4 778.171 0.275235
5 917.197 0.266006
6 1080.27 0.267445
7 1219.52 0.264942
8 1370.84 0.266641
9 1391.92 0.246123
10 1413.46 0.229932
11 1522.33 0.230018
12 1614.6 0.228383
13 1654.22 0.220483
14 1739.34 0.219658
15 1806.68 0.217205
16 1928.86 0.22166
EOD
$d2 << EOD
1 235.762 0.322542
2 427.821 0.312884
3 521.725 0.270825
4 704.668 0.291009
5 819.403 0.286217
6 951.258 0.291893
7 1058.45 0.292692
8 1181.79 0.299924
9 1201.32 0.283633
10 1220.21 0.270825
11 1296.75 0.272802
12 1363.81 0.273752
13 1390.99 0.267853
14 1449.39 0.268957
15 1501.31 0.269487
16 1583.16 0.275778
EOD
$d3 << EOD
1 222.304 0.349311
2 384.31 0.359169
3 460.442 0.332593
4 599.071 0.369154
5 680.777 0.376154
6 770.09 0.392813
7 840.273 0.403135
8 916.681 0.418947
9 928.728 0.408026
10 939.498 0.399464
11 987.807 0.408568
12 1029.16 0.415742
13 1045.21 0.413696
14 1078.36 0.419269
15 1109.46 0.424634
16 1152 0.434803
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
set ylabel 'fraction of copy bandwidth (3962 GB/s)'
set yrange [0:1.05]
plot $d0 using 1:3 with linespoints lw 2 pt 7 title 'depth 0', \
     $d1 using 1:3 with linespoints lw 2 pt 7 title 'depth 1024', \
     $d2 using 1:3 with linespoints lw 2 pt 7 title 'depth 8192', \
     $d3 using 1:3 with linespoints lw 2 pt 7 title 'depth 32768'
unset multiplot
